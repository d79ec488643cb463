package e2e

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/acme/billing/internal/version"
)

// release is one release CHANGELOG.md names: its version and the commit of
// main it is.
type release struct {
	Version string // "1.1.0", without the v
	Commit  string // as CHANGELOG.md writes it (abbreviated or full)
}

func (r release) String() string { return "v" + r.Version + " (" + r.Commit + ")" }

// semver compares two versions "X.Y.Z" numerically.
func semver(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range 3 {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return 0
}

// oldestUpgradeFrom is the oldest release the upgrade test starts from:
// the first release CHANGELOG.md names (v1.0.0, the release before the
// fence), so that every release a database may still hold is upgraded
// from. Raise it when a release stops supporting an upgrade from it.
const oldestUpgradeFrom = "1.0.0"

// previousReleases returns the releases this one is upgraded from, oldest
// first: those CHANGELOG.md names before version.Release, from
// oldestUpgradeFrom on.
func previousReleases(t *testing.T) []release {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatalf("CHANGELOG.md, which names the releases to upgrade from: %v", err)
	}
	entries, err := version.ParseChangelog(string(raw))
	if err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	var all []release
	for _, e := range entries {
		if e.Commit != "" {
			all = append(all, release{Version: e.Version, Commit: e.Commit})
		}
	}
	var prev []release
	for _, r := range all {
		if semver(r.Version, version.Release) < 0 && semver(r.Version, oldestUpgradeFrom) >= 0 {
			prev = append(prev, r)
		}
	}
	if len(prev) == 0 {
		t.Fatalf("CHANGELOG.md names no release with its commit before v%s (from v%s on): "+
			"want entries such as \"## 1.1.0\" with \"- Commit: e6198e4…\"; it names %v", version.Release, oldestUpgradeFrom, all)
	}
	// Oldest first, whatever order the file keeps.
	for i := 1; i < len(prev); i++ {
		for j := i; j > 0 && semver(prev[j].Version, prev[j-1].Version) < 0; j-- {
			prev[j], prev[j-1] = prev[j-1], prev[j]
		}
	}
	return prev
}

// repoRoot is the repository's top directory (the e2e module is one of
// its directories).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// releaseCacheDir is where built releases are kept between runs, outside
// the repository: $BILLING_CACHE_DIR/releases (scripts/kafka.sh keeps the
// broker's jars under the same directory, /var/cache/billing by default),
// or the user's cache directory when that is not writable.
func releaseCacheDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("BILLING_CACHE_DIR")
	if base == "" {
		base = "/var/cache/billing"
	}
	dir := filepath.Join(base, "releases")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if f, err := os.CreateTemp(dir, ".probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return dir
		}
	}
	user, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no writable cache directory for built releases: %v", err)
	}
	dir = filepath.Join(user, "billing", "releases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildRelease returns the path of r's billing binary, built from this
// repository's own history: the commit's tree is exported (git archive)
// into a temporary directory and built there with this test's Go
// toolchain, as `make build` builds it. The binary is cached by commit,
// Go version and platform, so only the first run pays for the build. A
// commit the clone does not have (a shallow clone) fails the test saying
// so.
func buildRelease(t *testing.T, r release) string {
	t.Helper()
	root := repoRoot(t)
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", r.Commit+"^{commit}").Output()
	if err != nil {
		shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		t.Fatalf("release %s: commit %s is not in this clone's history (shallow: %s): "+
			"the upgrade test builds previous releases from the repository's own history; "+
			"fetch it whole (git fetch --unshallow; in CI a checkout with fetch-depth: 0)",
			r, r.Commit, strings.TrimSpace(string(shallow)))
	}
	commit := strings.TrimSpace(string(full))
	bin := filepath.Join(releaseCacheDir(t), fmt.Sprintf("billing-%s-%s-%s-%s", commit, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	if _, err := os.Stat(bin); err == nil {
		t.Logf("release %s: cached %s", r, bin)
		return bin
	}

	src := t.TempDir()
	if err := exportTree(root, commit, src); err != nil {
		t.Fatalf("release %s: %v", r, err)
	}
	tmp := bin + ".tmp-" + strconv.Itoa(os.Getpid())
	pkg := "github.com/acme/billing/internal/version"
	build := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-X "+pkg+".version=v"+r.Version+" -X "+pkg+".revision="+commit,
		"-o", tmp, "./cmd/billing")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("release %s: go build: %v\n%s", r, err, out)
	}
	// Renamed into place whole: a concurrent run finds either no binary
	// or a complete one.
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("release %s: built %s", r, bin)
	return bin
}

// exportTree writes the tree of commit into dir (git archive, unpacked).
func exportTree(root, commit, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git archive %s: %w", commit, err)
	}
	untarErr := untar(out, dir)
	_, _ = io.Copy(io.Discard, out) // let git finish writing if untar stopped early
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", commit, err, stderr.String())
	}
	return untarErr
}

// untar unpacks the regular files, directories and symbolic links of a tar
// stream from git archive into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q outside the tree", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
	}
}
