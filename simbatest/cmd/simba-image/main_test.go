package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/simba-go/simba/simbatest"
)

// Without Docker the command says so and how to fix it.
func TestNoDockerNamesTheFix(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/simba/docker.sock")
	var out, errOut bytes.Buffer
	err := run(context.Background(), nil, &out, &errOut)
	if !errors.Is(err, errNoDocker) {
		t.Fatalf("run = %v, want errNoDocker", err)
	}
	for _, want := range []string{`DOCKER_HOST="unix:///nonexistent/simba/docker.sock"`, "Fix: start Docker", "set DOCKER_HOST"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestPrintAndArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-print", "-base", "mirror.example/library/debian:bookworm-slim"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	df := out.String()
	for _, want := range []string{"FROM mirror.example/library/debian:bookworm-slim", "postgresql mariadb-server redis-server redis-tools zookeeper", "ENV PATH=/usr/lib/postgresql/15/bin"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if err := run(context.Background(), []string{"extra"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("run with an argument = %v, want an error naming it", err)
	}
}

// The image's name is its cache key: scripts/services/docker.sh's build,
// this command's and simbatest.LocalImage must agree on it and on the
// packages, or an engine keeps an image without a server the tests need
// (ADR 0265).
func TestSameImageAsTheScript(t *testing.T) {
	b, err := os.ReadFile("../../../scripts/services/docker.sh")
	if err != nil {
		t.Fatalf("the repository's build script: %v", err)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && (k == "SIMBA_IMAGE" || k == "SIMBA_IMAGE_PKGS") {
			vars[k] = strings.Trim(v, `"`)
		}
	}
	if vars["SIMBA_IMAGE"] != defaultTag || vars["SIMBA_IMAGE_PKGS"] != packages {
		t.Errorf("docker.sh builds %q with %q; simba-image builds %q with %q", vars["SIMBA_IMAGE"], vars["SIMBA_IMAGE_PKGS"], defaultTag, packages)
	}
	if simbatest.LocalImage != defaultTag {
		t.Errorf("simbatest.LocalImage = %q, simba-image builds %q", simbatest.LocalImage, defaultTag)
	}
	for _, pkg := range []string{"etcd-server", "zookeeper", "redis-server", "mariadb-server", "postgresql"} {
		if !strings.Contains(" "+packages+" ", " "+pkg+" ") {
			t.Errorf("the image lacks %s", pkg)
		}
	}
}
