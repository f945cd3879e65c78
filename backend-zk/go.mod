module github.com/simba-go/simba/backend-zk

go 1.25.0
