package config

import (
	"flag"
	"net/url"
	"strings"
)

// SecretVar registers a flag for a secret whose default came from the
// environment: -h shows "(set)" instead of the secret.
func SecretVar(fs *flag.FlagSet, p *string, name, usage string) {
	fs.Var((*secretValue)(p), name, usage)
}

// URLVar registers a flag for a URL that may carry a password: -h shows it
// with the password masked.
func URLVar(fs *flag.FlagSet, p *string, name, usage string) {
	fs.Var((*urlValue)(p), name, usage)
}

type secretValue string

func (v *secretValue) String() string {
	if v == nil || *v == "" {
		return ""
	}
	return "(set)"
}

func (v *secretValue) Set(s string) error { *v = secretValue(s); return nil }

type urlValue string

func (v *urlValue) String() string {
	if v == nil {
		return ""
	}
	return Redact(string(*v))
}

func (v *urlValue) Set(s string) error { *v = urlValue(s); return nil }

// Redact returns s with the password of a URL masked ("xxxxx"), for -h and
// logs; a string that is not a URL with a user is returned as it is, unless
// it cannot be parsed, when it is withheld altogether (it may be a
// mistyped URL with a password in it).
func Redact(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(set, not a URL)"
	}
	if u.Scheme == "" && strings.Contains(strings.ToLower(s), "password") {
		return "(set)" // a key=value connection string
	}
	if _, has := u.User.Password(); has {
		return u.Redacted()
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return s
}
