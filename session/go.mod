module github.com/simba-go/simba/session

go 1.25.0

require (
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/term v0.1.0
)

require (
	github.com/simba-go/simba/internal v0.1.0
	go.uber.org/goleak v1.3.0
)

replace github.com/simba-go/simba/deadline => ../deadline

replace github.com/simba-go/simba/term => ../term

replace github.com/simba-go/simba/internal => ../internal
