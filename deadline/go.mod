module github.com/simba-go/simba/deadline

go 1.25.0
