package deploy

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// unreachable are addresses no billing pod may reach (issue 30 point 9):
// cloud metadata services, which hand out the node's credentials, and the
// link-local and loopback ranges they live in.
var unreachable = []string{
	"169.254.169.254", // AWS, GCP, Azure, OpenStack, Oracle metadata
	"169.254.170.2",   // AWS ECS task metadata
	"169.254.0.1",     // link-local
	"100.100.100.200", // Alibaba Cloud metadata
	"127.0.0.1",       // loopback (the node's, with host networking)
	"fd00:ec2::254",   // AWS IPv6 metadata
	"fe80::1",         // IPv6 link-local
	"::1",             // IPv6 loopback
	"::ffff:169.254.169.254",
}

// egressProblems returns what makes np's egress more than "named
// destinations only": a rule without destinations (it allows every address,
// 169.254.169.254 included), a selector that names no namespace or pod (it
// selects every one), an ipBlock that lets through an address of
// unreachable.
func egressProblems(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for i, rule := range np.Spec.Egress {
		what := fmt.Sprintf("egress rule %d (ports %v)", i, portList(rule.Ports))
		if len(rule.To) == 0 {
			out = append(out, what+": no destination, so every address, 169.254.169.254 included")
		}
		for j, peer := range rule.To {
			switch {
			case peer.IPBlock != nil:
				out = append(out, ipBlockProblems(fmt.Sprintf("%s peer %d", what, j), peer.IPBlock)...)
			case peer.NamespaceSelector != nil && len(peer.NamespaceSelector.MatchLabels) == 0 && len(peer.NamespaceSelector.MatchExpressions) == 0:
				out = append(out, fmt.Sprintf("%s peer %d: an empty namespaceSelector selects every namespace", what, j))
			case peer.NamespaceSelector == nil && (peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0 && len(peer.PodSelector.MatchExpressions) == 0):
				out = append(out, fmt.Sprintf("%s peer %d: selects every pod of the namespace, names none", what, j))
			}
		}
	}
	return out
}

// ipBlockProblems returns the addresses of unreachable that b lets through.
func ipBlockProblems(what string, b *networkingv1.IPBlock) []string {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return []string{fmt.Sprintf("%s: cidr %q: %v", what, b.CIDR, err)}
	}
	var except []netip.Prefix
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil || !cidr.Overlaps(p) || p.Bits() < cidr.Bits() {
			return []string{fmt.Sprintf("%s: except %q: not a range inside %s", what, e, b.CIDR)}
		}
		except = append(except, p)
	}
	var out []string
	for _, a := range unreachable {
		addr := netip.MustParseAddr(a)
		if !cidr.Contains(addr) {
			continue
		}
		excepted := false
		for _, e := range except {
			excepted = excepted || e.Contains(addr)
		}
		if !excepted {
			out = append(out, fmt.Sprintf("%s: %s lets %s through", what, b.CIDR, a))
		}
	}
	return out
}

func portList(ports []networkingv1.NetworkPolicyPort) []string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s/%s", p.Port.String(), *p.Protocol))
	}
	return out
}

// TestEgressChecksCatchOpenDestinations: the checks fail the policy billing
// shipped before (ports without destinations: 169.254.169.254:80 was
// reachable), and ipBlocks that keep a metadata address in.
func TestEgressChecksCatchOpenDestinations(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"ports without destinations": `
spec:
  egress:
    - ports: [{port: 443, protocol: TCP}, {port: 80, protocol: TCP}]`,
		"the whole internet": `
spec:
  egress:
    - to: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8]}}]
      ports: [{port: 443, protocol: TCP}]`,
		"IPv6 with its metadata address": `
spec:
  egress:
    - to: [{ipBlock: {cidr: "::/0", except: ["fe80::/10", "::1/128", "::ffff:0:0/96"]}}]
      ports: [{port: 443, protocol: TCP}]`,
		"every namespace": `
spec:
  egress:
    - to: [{namespaceSelector: {}}]
      ports: [{port: 5432, protocol: TCP}]`,
		"every pod of the namespace": `
spec:
  egress:
    - to: [{podSelector: {}}]
      ports: [{port: 5432, protocol: TCP}]`,
	} {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(egressProblems(&np)) == 0 {
			t.Errorf("%s: no problem found, want one", name)
		}
	}
}
