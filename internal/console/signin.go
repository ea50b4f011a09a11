package console

import (
	"crypto/subtle"
	"net/http"
)

// WithOneTimeSignIn lets one browser sign in without a token, for `reeve
// dev --secure`: the page at /login/once?code=CODE shows a button that
// posts the code, and the first post of it gets a session whose calls carry
// token (the admin token dev made at start). The code works once; later
// posts get the sign-in page with an error. The page does not sign in on
// GET, so a browser that prefetches the link does not use it up. Off by
// default; it needs WithSecure and a code of at least 16 characters.
func WithOneTimeSignIn(code, token string) Option {
	return func(s *Server) {
		if len(code) >= 16 && token != "" {
			s.once = &oneTimeSignIn{code: code, token: token}
		}
	}
}

type oneTimeSignIn struct {
	code, token string
	used        bool // under Server.onceMu
}

type onceData struct {
	pageData
	Code string
}

// loginOncePage shows the button that posts the one-time code.
func (s *Server) loginOncePage(w http.ResponseWriter, r *http.Request) {
	if s.once == nil || !s.secure {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login-once", onceData{pageData: pageData{Title: "Sign in", Secure: s.secure}, Code: r.URL.Query().Get("code")})
}

// loginOnce signs the browser in with the one-time code, once.
func (s *Server) loginOnce(w http.ResponseWriter, r *http.Request) {
	data := loginData{pageData: pageData{Title: "Sign in", Secure: s.secure}, Next: "/overview", Namespace: "default"}
	if !sameOrigin(r) {
		data.Error = "Sign-in refused: the form was posted from another site."
		s.render(w, r, http.StatusForbidden, "login", data)
		return
	}
	token, ok := s.useOnce(r.PostFormValue("code"))
	if !ok {
		data.Error = "This one-time sign-in link was used already, or is not this console's: restart reeve dev --secure for another, or sign in with a token."
		s.render(w, r, http.StatusUnauthorized, "login", data)
		return
	}
	ss := s.sessions.create(token)
	s.setCookie(w, r, ss)
	http.Redirect(w, r, "/overview", http.StatusSeeOther)
}

// useOnce returns the one-time sign-in's token if code is its code and it
// was not used, and marks it used.
func (s *Server) useOnce(code string) (string, bool) {
	if s.once == nil || !s.secure {
		return "", false
	}
	s.onceMu.Lock()
	defer s.onceMu.Unlock()
	if s.once.used || subtle.ConstantTimeCompare([]byte(code), []byte(s.once.code)) != 1 {
		return "", false
	}
	s.once.used = true
	return s.once.token, true
}
