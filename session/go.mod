module github.com/simba-go/simba/session

go 1.25.0
