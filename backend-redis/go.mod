module github.com/simba-go/simba/backend-redis

go 1.25.0
