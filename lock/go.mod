module github.com/simba-go/simba/lock

go 1.25.0
