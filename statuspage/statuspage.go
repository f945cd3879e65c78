// Package statuspage serves a Simba session's state to people and tools:
// JSON of the session snapshot plus the holders of the names the process
// watches, and a small HTML page that refreshes it live (no framework, no
// external assets).
//
//	mux.Handle("/simba/", http.StripPrefix("/simba", statuspage.New(s, statuspage.Watch("billing"))))
//
// GET / is the page; GET /status.json the JSON.
package statuspage

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/simba-go/simba/session"
)

//go:embed page.html
var page []byte

// Status is what /status.json answers.
type Status struct {
	Session session.Snapshot `json:"session"`
	Owner   session.Owner    `json:"owner"`
	// Holders of the watched names, as the backend reports them (empty when
	// nobody holds a name). Error says why they could not be asked.
	Holders []session.Holder `json:"holders"`
	Error   string           `json:"error,omitempty"`
}

// Handler serves the page and the JSON.
type Handler struct {
	s       *session.Session
	watched []string
	mux     *http.ServeMux
}

// An Option configures a Handler.
type Option func(*Handler)

// Watch adds lease names whose holders the page shows (whoever holds them,
// this process or another).
func Watch(names ...string) Option {
	return func(h *Handler) { h.watched = append(h.watched, names...) }
}

// New returns the handler for s.
func New(s *session.Session, opts ...Option) *Handler {
	h := &Handler{s: s, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}
	h.mux.HandleFunc("GET /status.json", h.json)
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	return h
}

// Status gathers the current status; ctx bounds the backend inspection.
func (h *Handler) Status(ctx context.Context) Status {
	st := Status{Session: h.s.Snapshot(), Owner: h.s.Owner(), Holders: []session.Holder{}}
	if len(h.watched) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		hs, err := h.s.Inspect(ctx, session.InspectRequest{Names: h.watched})
		if err != nil {
			st.Error = err.Error()
		} else {
			st.Holders = hs
		}
	}
	return st
}

func (h *Handler) json(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(h.Status(r.Context()))
}

// ServeHTTP serves / (the page) and /status.json.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
