module github.com/simba-go/simba/fxsimba

go 1.25.0
