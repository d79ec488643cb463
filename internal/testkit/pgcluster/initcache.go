package pgcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The initdb cache. initdb takes one to two seconds, most of a throwaway
// cluster's start-up, and every test binary that needs Postgres starts one.
// Its output depends only on the binaries and the arguments, so the first
// run's data directory is kept in the user's cache directory and later
// clusters start from a copy (tens of milliseconds). The cache lives in
// os.UserCacheDir, which only its owner can write: a data directory decides
// what the server runs, so it must not come from a directory others share.
// Any problem with the cache falls back to running initdb.

// cacheKey names the cache entry for these binaries and initdb arguments.
func (c *Cluster) cacheKey(ctx context.Context, args []string) (string, error) {
	version, err := exec.CommandContext(ctx, filepath.Join(c.bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", c.bin, version, strings.Join(args, "\x00"))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// cacheDir returns the directory holding cache entries, created private to
// the current user, or an error when there is none that is safe to use.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "billing-pgcluster")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not private to this user", dir)
	}
	return dir, nil
}

// fromCache fills the empty data directory from the cache entry key and
// reports whether it did.
func (c *Cluster) fromCache(key string) bool {
	base, err := cacheDir()
	if err != nil {
		return false
	}
	src := filepath.Join(base, key)
	if _, err := os.Stat(filepath.Join(src, "PG_VERSION")); err != nil {
		return false
	}
	if err := copyTree(src, c.dir); err != nil {
		c.log.Warn("initdb cache unusable, running initdb", slog.Any("error", err))
		c.emptyDir()
		return false
	}
	return true
}

// toCache stores the freshly made data directory as entry key. Concurrent
// writers each build a private copy and rename it into place; the first
// rename wins.
func (c *Cluster) toCache(key string) {
	base, err := cacheDir()
	if err != nil {
		return
	}
	dst := filepath.Join(base, key)
	if _, err := os.Stat(dst); err == nil {
		return
	}
	tmp, err := os.MkdirTemp(base, key+".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(c.dir, tmp); err != nil {
		c.log.Warn("cannot fill the initdb cache", slog.Any("error", err))
		return
	}
	_ = os.Rename(tmp, dst) // fails harmlessly when another process won
}

// emptyDir removes everything inside the data directory, keeping it.
func (c *Cluster) emptyDir() {
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(c.dir, e.Name()))
	}
}

// copyTree copies the regular files and directories under src into dst,
// keeping permission bits. A data directory made by initdb holds nothing
// else.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return os.Mkdir(target, info.Mode().Perm())
		case d.Type().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return fmt.Errorf("copy %s: %w", path, errors.ErrUnsupported)
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
