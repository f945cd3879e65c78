module github.com/simba-go/simba/otelsimba

go 1.25.0

require (
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/group v0.1.0
	github.com/simba-go/simba/lock v0.1.0
	github.com/simba-go/simba/session v0.1.0
	github.com/simba-go/simba/term v0.1.0
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/metric v1.46.0
	go.opentelemetry.io/otel/sdk v1.46.0
	go.opentelemetry.io/otel/sdk/metric v1.46.0
	go.opentelemetry.io/otel/trace v1.46.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/simba-go/simba/internal v0.1.0
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/simba-go/simba/deadline => ../deadline

replace github.com/simba-go/simba/election => ../election

replace github.com/simba-go/simba/session => ../session

replace github.com/simba-go/simba/term => ../term

replace github.com/simba-go/simba/internal => ../internal
replace github.com/simba-go/simba/group => ../group

replace github.com/simba-go/simba/lock => ../lock
