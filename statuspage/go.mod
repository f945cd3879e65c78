module github.com/simba-go/simba/statuspage

go 1.25.0

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/simba-go/simba/backend-zk v0.1.0
	github.com/simba-go/simba/deadline v0.1.0
	github.com/simba-go/simba/election v0.1.0
	github.com/simba-go/simba/group v0.1.0
	github.com/simba-go/simba/internal v0.1.0
	github.com/simba-go/simba/session v0.1.0
	github.com/simba-go/simba/term v0.1.0
)

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/go-zookeeper/zk v1.0.4 // indirect
)

replace github.com/simba-go/simba/deadline => ../deadline

replace github.com/simba-go/simba/election => ../election

replace github.com/simba-go/simba/session => ../session

replace github.com/simba-go/simba/term => ../term

replace github.com/simba-go/simba/internal => ../internal

replace github.com/simba-go/simba/group => ../group

replace github.com/simba-go/simba/backend-zk => ../backend-zk
