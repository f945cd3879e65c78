// Package zkbackend is the Simba backend for ZooKeeper (go-zookeeper/zk):
// the ZooKeeper session is the Simba session, leases are ephemeral nodes and
// tokens are their creation zxids.
package zkbackend
