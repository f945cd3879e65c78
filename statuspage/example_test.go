package statuspage_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
)

func ExampleNew() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil), session.WithIdentity("billing-1", nil))
	defer s.Close()

	h, err := statuspage.New(s, statuspage.Watch("billing"), statuspage.WatchGroup("orders", 8))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/simba/", http.StripPrefix("/simba", h))
	// http.ListenAndServe(":8080", mux): the page at /simba/, the JSON at /simba/status.json
	st := h.Status(context.Background())
	fmt.Println(st.Owner.Identity, st.Session.State, len(st.Holders), st.Groups[0].Name, len(st.Groups[0].Unowned))
	// Output: billing-1 LIVE 0 orders 8
}
