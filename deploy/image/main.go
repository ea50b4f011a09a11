// Command reeve-image writes Reeve's container image as an OCI image layout
// archive (a tar of an OCI layout: oci-layout, index.json, blobs/), without a
// container engine and without pulling anything: the image is built from
// scratch with one layer holding the static reeve binary, the CA bundle, and
// /etc/passwd and /etc/group naming the non-root user it runs as.
//
//	reeve-image --binary bin/reeve-linux-amd64 --out bin/reeve-image.tar \
//	    --version v0.4.0 --revision $(git rev-parse HEAD)
//
// Load the archive with `docker load -i` (Docker 25 or later), `podman load
// -i`, `ctr images import`, or push it with `skopeo copy
// oci-archive:bin/reeve-image.tar docker://REGISTRY/reeve:TAG`. `make image`
// runs it; see docs/kubernetes.md.
//
// It lives in a module of its own (deploy/image) so that go-containerregistry
// does not become a dependency of Reeve itself.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: not root, the uid distroless images use.
const (
	uid      = 65532
	userName = "nonroot"
	home     = "/home/nonroot"
)

// Paths inside the image.
const (
	binaryPath = "/reeve"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
)

// spec is what goes into the image.
type spec struct {
	Binary   string    // a static linux reeve binary
	CA       string    // PEM CA bundle, e.g. Debian's /etc/ssl/certs/ca-certificates.crt
	Version  string    // org.opencontainers.image.version
	Revision string    // org.opencontainers.image.revision (git commit)
	Source   string    // org.opencontainers.image.source
	Ref      string    // image name written into the index, e.g. reeve:v0.4.0
	Arch     string    // GOARCH of the binary
	Created  time.Time // creation time and the time of every file (reproducible builds)
}

func main() {
	var s spec
	var out string
	flag.StringVar(&s.Binary, "binary", "", "static linux reeve binary (required)")
	flag.StringVar(&out, "out", "", "OCI layout archive to write (required)")
	flag.StringVar(&s.CA, "ca", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to install at "+caPath)
	flag.StringVar(&s.Version, "version", "dev", "image version label")
	flag.StringVar(&s.Revision, "revision", "unknown", "git commit label")
	flag.StringVar(&s.Source, "source", "https://github.com/reeve-org/reeve", "source repository label")
	flag.StringVar(&s.Ref, "ref", "", "image name in the archive's index (default reeve:<version>)")
	flag.StringVar(&s.Arch, "arch", "amd64", "architecture of the binary (GOARCH)")
	flag.Parse()
	if s.Binary == "" || out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: reeve-image --binary FILE --out FILE [--version V --revision SHA]")
		os.Exit(2)
	}
	if s.Ref == "" {
		s.Ref = "reeve:" + s.Version
	}
	s.Created = time.Unix(0, 0).UTC()
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		sec, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "reeve-image: SOURCE_DATE_EPOCH: %v\n", err)
			os.Exit(2)
		}
		s.Created = time.Unix(sec, 0).UTC()
	}
	if err := write(s, out); err != nil {
		fmt.Fprintf(os.Stderr, "reeve-image: %v\n", err)
		os.Exit(1)
	}
}

// write builds the image of s and writes it to out as an OCI layout archive.
func write(s spec, out string) error {
	img, err := build(s)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".reeve-image-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": s.Ref,
		"io.containerd.image.name":          s.Ref, // the name `docker load` and `ctr import` give it
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: s.Arch}))
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp, s.Created); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// build returns the image: one layer on an empty base.
func build(s spec) (v1.Image, error) {
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Binary, err)
	}
	ca, err := os.ReadFile(s.CA)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate", s.CA)
	}
	files, err := layerTar(s.Created, bin, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "reeve-image: /reeve, CA bundle, /etc/passwd", Comment: "reeve " + s.Version},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint = []string{binaryPath}
	cf.Config.Cmd = nil
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.WorkingDir = home
	cf.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=" + caPath}
	cf.Config.ExposedPorts = map[string]struct{}{"7430/tcp": {}}
	cf.Config.Labels = labels(s)
	return mutate.ConfigFile(img, cf)
}

// labels are the image's OCI annotations (the Dockerfile sets the same but
// created).
func labels(s spec) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "reeve",
		"org.opencontainers.image.description": "Reeve: scheduler, supervisor and CLI of the Scheduler Agent Supervisor platform",
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.created":     s.Created.Format(time.RFC3339),
	}
}

// checkStatic refuses a binary that needs a dynamic loader: the image has
// no libc.
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			return errors.New("dynamically linked (has an ELF interpreter): build it with CGO_ENABLED=0")
		case elf.PT_DYNAMIC:
			return errors.New("dynamically linked (has a dynamic section): build it with CGO_ENABLED=0")
		}
	}
	return nil
}

// layerTar is the image's file system.
func layerTar(mtime time.Time, bin, ca []byte) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", userName, uid, uid, userName, home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	entries := []struct {
		name string
		mode int64
		uid  int
		dir  bool
		data []byte
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: uid, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "reeve", mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir to the tar file out, in lexical order
// with fixed times and owners, so the same image gives the same archive.
func tarDir(dir, out string, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
