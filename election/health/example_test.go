package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/election/health"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
)

func ExampleNew() {
	b, _ := memory.New()
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()
	e, _ := election.Start(s, "billing")
	defer e.Close()

	mux := http.NewServeMux()
	mux.Handle("/healthz", health.New(s, health.Watch(e)))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 ok
}
