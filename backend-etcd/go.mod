module github.com/simba-go/simba/backend-etcd

go 1.25.0

require (
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/session v0.1.0
	go.etcd.io/etcd/api/v3 v3.5.29
	go.etcd.io/etcd/client/v3 v3.5.29
	go.uber.org/zap v1.17.0
	google.golang.org/grpc v1.79.3
)

require (
	github.com/coreos/go-semver v0.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.3.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.29 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

replace (
	github.com/simba-go/simba/deadline => ../deadline
	github.com/simba-go/simba/internal => ../internal
	github.com/simba-go/simba/session => ../session
	github.com/simba-go/simba/term => ../term
)
