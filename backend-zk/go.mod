module github.com/simba-go/simba/backend-zk

go 1.25.0

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/session v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/simba-go/simba/internal v0.1.0
	github.com/simba-go/simba/term v0.1.0
)

replace (
	github.com/simba-go/simba/deadline => ../deadline
	github.com/simba-go/simba/election => ../election
	github.com/simba-go/simba/session => ../session
	github.com/simba-go/simba/term => ../term
)

replace github.com/simba-go/simba/internal => ../internal
