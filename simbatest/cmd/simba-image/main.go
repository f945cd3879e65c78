// Command simba-image builds the one local image that holds every server
// simbatest runs (PostgreSQL, MariaDB, Redis, ZooKeeper, etcd, from Debian's
// packages), for machines that cannot pull the official images:
//
//	go run github.com/simba-go/simba/simbatest/cmd/simba-image@latest
//	export SIMBA_TEST_IMAGE=simba-servers:bookworm-2
//
// It needs a Docker engine (DOCKER_HOST, or the default socket), the base
// image (default debian:bookworm-slim; -base names a mirror's copy) and
// Debian's package mirror (HTTP_PROXY and HTTPS_PROXY are passed to the
// build). With no registry at all, the repository's
// scripts/services/docker.sh builds the same image with debootstrap.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// Image and packages: the same as scripts/services/docker.sh's.
const (
	defaultTag  = "simba-servers:bookworm-2"
	defaultBase = "debian:bookworm-slim"
	packages    = "postgresql mariadb-server redis-server redis-tools zookeeper etcd-server procps"
)

// dockerfile is the build: Debian's packages, no service started while they
// install (policy-rc.d), PostgreSQL's binaries on PATH.
func dockerfile(base string) string {
	return "FROM " + base + "\n" +
		"RUN printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \\\n" +
		" && apt-get update -qq \\\n" +
		" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends " + packages + " \\\n" +
		" && apt-get clean && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d\n" +
		"ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n" +
		"LABEL org.simba-go.simbatest.image=1\n"
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// errNoDocker, errBase and errBuild are wrapped by run's errors, each
// with the fix.
var (
	errNoDocker = errors.New("simba-image: no Docker engine answers")
	errBase     = errors.New("simba-image: the base image cannot be had")
	errBuild    = errors.New("simba-image: the build failed")
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simba-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", defaultTag, "the image's name (simbatest's SIMBA_TEST_IMAGE)")
	base := fs.String("base", defaultBase, "the Debian bookworm base image, e.g. a mirror's copy: mirror.example/library/debian:bookworm-slim")
	print := fs.Bool("print", false, "print the Dockerfile and exit, to build it yourself")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("simba-image: unexpected arguments %q (flags: -tag, -base, -print)", fs.Args())
	}
	if *print {
		_, err := io.WriteString(stdout, dockerfile(*base))
		return err
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return noDocker(err)
	}
	defer func() { _ = cli.Close() }()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = cli.Ping(pctx, client.PingOptions{})
	cancel()
	if err != nil {
		return noDocker(err)
	}
	if _, err := cli.ImageInspect(ctx, *base); err != nil {
		fmt.Fprintf(stderr, "simba-image: pulling %s\n", *base)
		r, err := cli.ImagePull(ctx, *base, client.ImagePullOptions{})
		if err == nil {
			err = r.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("%w: pull %s: %v\nFix: pass -base with a copy of it from a registry you can reach (-base <mirror>/library/debian:bookworm-slim), "+
				"or, with no registry at all, build the image with debootstrap: scripts/services/docker.sh in the repository", errBase, *base, err)
		}
	}
	fmt.Fprintf(stderr, "simba-image: building %s from %s (%s); a few minutes\n", *tag, *base, packages)
	bctx, err := buildContext(dockerfile(*base))
	if err != nil {
		return err
	}
	buildArgs := map[string]*string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			buildArgs[k] = &v
		}
	}
	res, err := cli.ImageBuild(ctx, bctx, client.ImageBuildOptions{Tags: []string{*tag}, Remove: true, ForceRemove: true, BuildArgs: buildArgs})
	if err != nil {
		return fmt.Errorf("%w: %v", errBuild, err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := follow(res.Body, stderr); err != nil {
		return fmt.Errorf("%w: %v\nFix: the build installs Debian's packages: it needs deb.debian.org (or HTTP_PROXY/HTTPS_PROXY, passed to the build)", errBuild, err)
	}
	fmt.Fprintf(stdout, "built %s. Use it in simbatest (it then disables Ryuk itself):\n\texport SIMBA_TEST_IMAGE=%s\n", *tag, *tag)
	return nil
}

func noDocker(err error) error {
	host, set := os.LookupEnv("DOCKER_HOST")
	where := "DOCKER_HOST is not set and the default socket does not answer"
	if set {
		where = fmt.Sprintf("DOCKER_HOST=%q", host)
	}
	return fmt.Errorf("%w (%s): %v\nFix: start Docker (or Podman's Docker socket) and, if its socket is not the default one, set DOCKER_HOST to it", errNoDocker, where, err)
}

// buildContext is a tar holding the Dockerfile alone.
func buildContext(df string) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))}); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(tw, df); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// follow copies the build's output to w and returns its error, if any.
func follow(r io.Reader, w io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Stream != "" {
			_, _ = io.WriteString(w, m.Stream)
		}
		if m.Error != "" || m.ErrorDetail.Message != "" {
			return errors.New(strings.TrimSpace(m.Error + " " + m.ErrorDetail.Message))
		}
	}
}
