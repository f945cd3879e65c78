module github.com/simba-go/simba/backend-sql

go 1.25.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/session v0.1.0
	github.com/simba-go/simba/term v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/simba-go/simba/internal v0.1.0
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace (
	github.com/simba-go/simba/deadline => ../deadline
	github.com/simba-go/simba/election => ../election
	github.com/simba-go/simba/session => ../session
	github.com/simba-go/simba/term => ../term
)

replace github.com/simba-go/simba/internal => ../internal
