module github.com/simba-go/simba/election

go 1.25.0
