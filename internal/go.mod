module github.com/simba-go/simba/internal

go 1.25.0

require github.com/simba-go/simba/term v0.1.0

replace github.com/simba-go/simba/term => ../term
