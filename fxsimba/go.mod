module github.com/simba-go/simba/fxsimba

go 1.25.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/simba-go/simba/backend-redis v0.1.0
	github.com/simba-go/simba/backend-sql v0.1.0
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/group v0.1.0
	github.com/simba-go/simba/session v0.1.0
	github.com/simba-go/simba/term v0.1.0
	go.uber.org/fx v1.24.0
	go.uber.org/goleak v1.3.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

require (
	github.com/simba-go/simba/internal v0.1.0 // indirect
	go.uber.org/dig v1.19.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.26.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)

replace github.com/simba-go/simba/deadline => ../deadline

replace github.com/simba-go/simba/election => ../election

replace github.com/simba-go/simba/session => ../session

replace github.com/simba-go/simba/term => ../term

replace github.com/simba-go/simba/internal => ../internal

replace github.com/simba-go/simba/group => ../group

replace github.com/simba-go/simba/backend-sql => ../backend-sql

replace github.com/simba-go/simba/backend-redis => ../backend-redis
