package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The Dockerfile cannot be built here (no container engine); this keeps it
// in step with the image `make image` builds: static binary at /reeve, the
// same non-root user, entrypoint and OCI labels.
func TestDockerfileMatchesImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"COPY --from=build /out/reeve " + binaryPath,
		"USER 65532:65532",
		`ENTRYPOINT ["` + binaryPath + `"]`,
		"WORKDIR " + home,
		"internal/version.version=${VERSION}",
		"internal/version.commit=${REVISION}",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	found := map[string]bool{}
	for _, l := range regexp.MustCompile(`org\.opencontainers\.image\.[a-z]+`).FindAllString(df, -1) {
		found[l] = true
	}
	for l := range labels(spec{}) {
		if !found[l] && l != "org.opencontainers.image.created" {
			t.Errorf("Dockerfile lacks the label %s that make image sets", l)
		}
	}
}
