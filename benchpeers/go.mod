module github.com/simba-go/simba/benchpeers

go 1.25.0

replace (
	github.com/simba-go/simba/backend-etcd => ../backend-etcd
	github.com/simba-go/simba/backend-redis => ../backend-redis
	github.com/simba-go/simba/backend-sql => ../backend-sql
	github.com/simba-go/simba/backend-zk => ../backend-zk
	github.com/simba-go/simba/deadline => ../deadline
	github.com/simba-go/simba/election => ../election
	github.com/simba-go/simba/lock => ../lock
	github.com/simba-go/simba/session => ../session
	github.com/simba-go/simba/term => ../term
)

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.17.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/go-zookeeper/zk v1.0.4
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/simba-go/simba/backend-etcd v0.1.0
	github.com/simba-go/simba/backend-redis v0.1.0
	github.com/simba-go/simba/backend-sql v0.1.0
	github.com/simba-go/simba/backend-zk v0.1.0
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/lock v0.1.0
	github.com/simba-go/simba/session v0.1.0
	go.etcd.io/etcd/api/v3 v3.5.29
	go.etcd.io/etcd/client/v3 v3.5.29
	go.uber.org/zap v1.17.0
)

require (
	github.com/coreos/go-semver v0.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.3.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.29 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	golang.org/x/net v0.51.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/grpc v1.79.3 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/simba-go/simba/internal v0.1.0 // indirect
	github.com/simba-go/simba/term v0.1.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.43.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/simba-go/simba/internal => ../internal
