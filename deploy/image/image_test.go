package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image under test: REEVE_IMAGE (the archive `make image` wrote, with
// REEVE_IMAGE_VERSION and REEVE_IMAGE_REVISION its labels), or one the test
// builds from ../../cmd/reeve with the values below.
const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

var (
	imageOnce sync.Once
	imagePath string
	imageErr  error
)

func imageUnderTest(t *testing.T) (path, version, revision string) {
	t.Helper()
	if p := os.Getenv("REEVE_IMAGE"); p != "" {
		return p, os.Getenv("REEVE_IMAGE_VERSION"), os.Getenv("REEVE_IMAGE_REVISION")
	}
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reeve-image-test-")
		if err != nil {
			imageErr = err
			return
		}
		bin := filepath.Join(dir, "reeve")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
			"-X github.com/reeve-org/reeve/internal/version.version="+testVersion+
				" -X github.com/reeve-org/reeve/internal/version.commit="+testRevision,
			"-o", bin, "./cmd/reeve")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = errors.New("go build: " + err.Error() + "\n" + string(out))
			return
		}
		imagePath = filepath.Join(dir, "reeve-image.tar")
		imageErr = write(testSpec(bin), imagePath)
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imagePath, testVersion, testRevision
}

func TestMain(m *testing.M) {
	code := m.Run()
	if imagePath != "" {
		os.RemoveAll(filepath.Dir(imagePath))
	}
	os.Exit(code)
}

func testSpec(bin string) spec {
	return spec{Binary: bin, CA: "/etc/ssl/certs/ca-certificates.crt", Version: testVersion, Revision: testRevision,
		Source: "https://github.com/reeve-org/reeve", Ref: "reeve:" + testVersion, Arch: "amd64", Created: time.Unix(0, 0).UTC()}
}

// openArchive unpacks an OCI layout archive and returns its only image and
// the index's descriptor of it.
func openArchive(t *testing.T, archive string) (v1.Image, v1.Descriptor) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q escapes the archive", archive, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected entry %q of type %c", archive, h.Name, h.Typeflag)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, desc
}

// files returns the entries of the image's flattened file system and the
// contents of its regular files.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	contents := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimPrefix(h.Name, "/")
		out[name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			contents[name] = b
		}
	}
	return out, contents
}

func TestImage(t *testing.T) {
	archive, wantVersion, wantRevision := imageUnderTest(t)
	img, desc := openArchive(t, archive)

	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q, want %q", desc.MediaType, types.OCIManifestSchema1)
	}
	if ref := desc.Annotations["org.opencontainers.image.ref.name"]; !strings.HasPrefix(ref, "reeve:") {
		t.Errorf("index names the image %q, want reeve:<version>", ref)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/reeve" {
		t.Errorf("entrypoint %q, want [/reeve]", got)
	}
	if u := cf.Config.User; u == "" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root") {
		t.Errorf("user %q: the image must not run as root", u)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	labels := cf.Config.Labels
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		if labels[k] == "" {
			t.Errorf("label %s missing", k)
		}
	}
	if wantVersion != "" && labels["org.opencontainers.image.version"] != wantVersion {
		t.Errorf("version label %q, want %q", labels["org.opencontainers.image.version"], wantVersion)
	}
	if wantRevision != "" && labels["org.opencontainers.image.revision"] != wantRevision {
		t.Errorf("revision label %q, want %q", labels["org.opencontainers.image.revision"], wantRevision)
	}

	fs, fileContents := files(t, img)
	for _, p := range []string{"/reeve", "/etc/passwd", "/etc/group", "/etc/ssl/certs/ca-certificates.crt"} {
		if fs[p] == nil || fs[p].Typeflag != tar.TypeReg {
			t.Fatalf("image lacks the file %s", p)
		}
	}
	if fs["/reeve"].Mode&0o111 == 0 {
		t.Errorf("/reeve mode %o is not executable", fs["/reeve"].Mode)
	}
	// The user is in /etc/passwd and /etc/group (names for tools, a home).
	uidPart, gidPart, _ := strings.Cut(cf.Config.User, ":")
	if !passwdHas(string(fileContents["/etc/passwd"]), 2, uidPart) {
		t.Errorf("/etc/passwd has no user with uid %s:\n%s", uidPart, fileContents["/etc/passwd"])
	}
	if gidPart != "" && !passwdHas(string(fileContents["/etc/group"]), 2, gidPart) {
		t.Errorf("/etc/group has no group with gid %s:\n%s", gidPart, fileContents["/etc/group"])
	}
	// The CA bundle holds certificates TLS to etcd and OTLP endpoints can use.
	if n := countCerts(t, fileContents["/etc/ssl/certs/ca-certificates.crt"]); n < 10 {
		t.Errorf("CA bundle holds %d certificates", n)
	}

	// The binary is static: no interpreter, no dynamic section.
	bin := fileContents["/reeve"]
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("/reeve is not ELF: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("/reeve is dynamically linked (program header %v)", p.Type)
		}
	}
	ef.Close()

	// It runs and says which build it is, matching the labels.
	exe := filepath.Join(t.TempDir(), "reeve")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("reeve version: %v", err)
	}
	var v struct {
		Version, Commit string
		GoVersion       string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("reeve version -o json: %v\n%s", err, out)
	}
	if v.Version != labels["org.opencontainers.image.version"] || v.Commit != labels["org.opencontainers.image.revision"] {
		t.Errorf("reeve version says %s at %s, labels say %s at %s", v.Version, v.Commit,
			labels["org.opencontainers.image.version"], labels["org.opencontainers.image.revision"])
	}
	if !strings.HasPrefix(v.GoVersion, "go1.") {
		t.Errorf("go_version %q", v.GoVersion)
	}
}

// passwdHas reports whether a line of an /etc/passwd- or /etc/group-style
// file has value in field i (0-based).
func passwdHas(file string, i int, value string) bool {
	for line := range strings.Lines(file) {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) > i && f[i] == value {
			return true
		}
	}
	return false
}

func countCerts(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return n
		}
		if _, err := x509.ParseCertificate(block.Bytes); err == nil {
			n++
		}
	}
}

// A binary that needs a dynamic loader would not start in an image without
// libc: the builder refuses it.
func TestRefusesDynamicBinary(t *testing.T) {
	s := testSpec("/bin/sh") // dynamically linked on Debian
	_, err := build(s)
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("build(/bin/sh) = %v, want a 'dynamically linked' error", err)
	}
	s.Binary = "/etc/passwd"
	if _, err := build(s); err == nil || !strings.Contains(err.Error(), "not an ELF binary") {
		t.Fatalf("build(/etc/passwd) = %v, want 'not an ELF binary'", err)
	}
}

// The same inputs give the same image digest (fixed times and owners).
func TestReproducible(t *testing.T) {
	archive, _, _ := imageUnderTest(t)
	if os.Getenv("REEVE_IMAGE") != "" {
		t.Skip("checked on the image the test builds itself")
	}
	img, _ := openArchive(t, archive)
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "again.tar")
	bin := filepath.Join(filepath.Dir(archive), "reeve")
	if err := write(testSpec(bin), again); err != nil {
		t.Fatal(err)
	}
	img2, _ := openArchive(t, again)
	got, err := img2.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("digest %s, then %s: the build is not reproducible", want, got)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Errorf("the archives differ byte for byte")
	}
}
