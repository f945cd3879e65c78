module github.com/simba-go/simba/backend-sql

go 1.25.0
