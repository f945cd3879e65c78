module github.com/simba-go/simba/group

go 1.25.0
