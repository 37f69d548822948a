package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
)

// withETags gives every resource of a profile with ETags an entity tag, in the ETag header and as
// @odata.etag, computed from its content (so it changes when the resource does), and refuses a
// PATCH whose If-Match no longer matches with 412, as HTTP defines it. A weak tag (W/"…") is
// accepted in If-Match as BMCs accept it.
func (s *Server) withETags(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Profile.ETags {
			next.ServeHTTP(w, r)
			return
		}
		switch r.Method {
		case http.MethodGet:
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			var res map[string]any
			if rec.Code == http.StatusOK && json.Unmarshal(body, &res) == nil && res["@odata.id"] != nil {
				tag := s.etagOf(r.URL.Path, body)
				res["@odata.etag"] = tag
				body, _ = json.Marshal(res)
				rec.Header().Set("ETag", tag)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
			return
		case http.MethodPatch:
			if s.Fault.takeConcurrentChange(r.URL.Path) {
				s.mu.Lock()
				s.revisions[strings.TrimSuffix(r.URL.Path, "/")]++
				s.mu.Unlock()
			}
			if match := r.Header.Get("If-Match"); match != "" && match != "*" {
				get := r.Clone(r.Context())
				get.Method, get.Body, get.ContentLength = http.MethodGet, http.NoBody, 0
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, get)
				if rec.Code == http.StatusOK && strings.TrimPrefix(match, "W/") != strings.TrimPrefix(s.etagOf(r.URL.Path, rec.Body.Bytes()), "W/") {
					s.mu.Lock()
					s.stats.StaleIfMatch++
					s.mu.Unlock()
					writeError(w, http.StatusPreconditionFailed, "Base.1.8.PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// etagOf is a weak entity tag of a resource's representation and its revision (bumped by a
// simulated change made by another client).
func (s *Server) etagOf(path string, body []byte) string {
	s.mu.Lock()
	rev := s.revisions[strings.TrimSuffix(path, "/")]
	s.mu.Unlock()
	h := fnv.New32a()
	_, _ = h.Write(bytes.TrimSpace(body))
	return fmt.Sprintf(`W/"%08x-%d"`, h.Sum32(), rev)
}
