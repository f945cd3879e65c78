module github.com/simba-go/simba/otelsimba

go 1.25.0
