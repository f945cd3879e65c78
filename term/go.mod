module github.com/simba-go/simba/term

go 1.25.0
