// Package simbatest starts real Simba backends in containers for tests:
// Redis (standalone or a three-master Cluster), PostgreSQL, MySQL (MariaDB)
// ZooKeeper (standalone or a three-node ensemble) and etcd (one member or a
// cluster of three), each returned ready,
// with its client and a Simba backend, and removed when the test ends. It
// also hands out the in-memory backend for unit tests that need no server.
//
// It is its own module so that an application importing Simba does not pull
// testcontainers-go unless its tests import simbatest.
//
// Containers run with host networking on free loopback ports chosen by the
// kit (a container needs no bridge network and reaches nothing but
// 127.0.0.1). By default they use the official images (redis, postgres,
// mariadb, zookeeper, gcr.io/etcd-development/etcd); when SIMBA_TEST_IMAGE
// names an image holding all five
// servers as Debian packages (built by
// "go run github.com/simba-go/simba/simbatest/cmd/simba-image@latest", or
// by the repository's scripts/services/docker.sh), every container runs
// that image instead, and testcontainers' reaper (Ryuk), whose image it
// does not hold, is turned off. Every requirement, variable and error is in
// the module's README.md.
// Every container carries the label org.simba-go.simbatest=1, so a sweep
// can remove what a killed test run left behind.
package simbatest
