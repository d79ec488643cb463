package kafkaclient

import (
	"context"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
)

// GroupDescription is a consumer group as its coordinator describes it.
type GroupDescription struct {
	Group   string
	State   string // Stable, PreparingRebalance, Empty, Dead…
	Members []GroupMember
}

// GroupMember is one member of a group: who it is, and the user data of
// its metadata in the group's protocol (what the member announced).
type GroupMember struct {
	ID       string
	ClientID string
	Host     string
	UserData []byte
}

// GroupDescriber returns a function that describes groups in one
// DescribeGroups request each (each group's part goes to its coordinator;
// a group the coordinator reports an error for is an error), over one
// client kept for all its calls, and a function that releases the
// client's connections.
func (c *Cluster) GroupDescriber() (func(ctx context.Context, groups []string) ([]GroupDescription, error), func()) {
	cl, done := c.client()
	return func(ctx context.Context, groups []string) ([]GroupDescription, error) {
		return describeGroups(ctx, cl, groups)
	}, done
}

func describeGroups(ctx context.Context, cl *kafkago.Client, groups []string) ([]GroupDescription, error) {
	resp, err := cl.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: groups})
	if err != nil {
		return nil, fmt.Errorf("describe groups: %w", err)
	}
	out := make([]GroupDescription, 0, len(resp.Groups))
	for _, g := range resp.Groups {
		if g.Error != nil {
			return nil, fmt.Errorf("describe group %s: %w", g.GroupID, g.Error)
		}
		d := GroupDescription{Group: g.GroupID, State: g.GroupState}
		for _, m := range g.Members {
			d.Members = append(d.Members, GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost,
				UserData: m.MemberMetadata.UserData})
		}
		out = append(out, d)
	}
	return out, nil
}
