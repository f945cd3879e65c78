module github.com/simba-go/simba/gocronsimba

go 1.25.0

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/lock v0.1.0
	github.com/simba-go/simba/session v0.1.0
	github.com/simba-go/simba/term v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/simba-go/simba/internal v0.1.0 // indirect
)

replace github.com/simba-go/simba/deadline => ../deadline

replace github.com/simba-go/simba/election => ../election

replace github.com/simba-go/simba/internal => ../internal

replace github.com/simba-go/simba/lock => ../lock

replace github.com/simba-go/simba/session => ../session

replace github.com/simba-go/simba/term => ../term
