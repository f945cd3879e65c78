module github.com/simba-go/simba/integration

go 1.25.0
