// Package redisbackend is the Simba backend for Redis standalone, Sentinel
// and Cluster (go-redis/v9), with atomic scripts and pub/sub release
// broadcast.
package redisbackend
