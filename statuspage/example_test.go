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

	mux := http.NewServeMux()
	mux.Handle("/simba/", http.StripPrefix("/simba", statuspage.New(s, statuspage.Watch("billing"))))
	// http.ListenAndServe(":8080", mux): the page at /simba/, the JSON at /simba/status.json
	st := statuspage.New(s, statuspage.Watch("billing")).Status(context.Background())
	fmt.Println(st.Owner.Identity, st.Session.State, len(st.Holders))
	// Output: billing-1 LIVE 0
}
