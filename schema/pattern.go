package schema

import (
	"fmt"
	"go/token"
	"strings"
	"unicode"
	"unicode/utf8"
)

// patternError is a problem in a pattern, at a byte offset into it.
type patternError struct {
	off int
	msg string
}

// parsePattern splits a key pattern into literals and parameters:
//
//	pattern   = { literal | parameter }
//	parameter = "{" name [ ":" type ] "}"
//	name      = ASCII Go identifier, not a keyword, not "_"
//	type      = string | int | int32 | int64 | uint | uint32 | uint64
//
// A literal is any text without '{', '}', white space or control characters.
// It reports every problem it can find; after an unclosed '{' it stops.
func parsePattern(s string) ([]Segment, []patternError) {
	var segs []Segment
	var errs []patternError
	fail := func(off int, format string, args ...any) {
		errs = append(errs, patternError{off, fmt.Sprintf(format, args...)})
	}
	if s == "" {
		fail(0, `pattern is empty; write a key pattern such as "table:{id}"`)
		return nil, errs
	}
	if len(s) > maxPatternLen {
		fail(0, "pattern is %d bytes long; keep it within %d", len(s), maxPatternLen)
		return nil, errs
	}
	seen := map[string]bool{} // parameter names so far
	lit := 0                  // start of the current literal
	flush := func(end int) {
		if end > lit {
			segs = append(segs, Segment{Literal: s[lit:end]})
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{':
			flush(i)
			j := strings.IndexAny(s[i+1:], "{}")
			if j < 0 || s[i+1+j] == '{' {
				fail(i, `"{" is not closed; write a parameter as {name} or {name:type}, e.g. {id}`)
				return segs, errs
			}
			end := i + 1 + j // the '}'
			seg, ok := parseParam(s[i+1:end], i, fail)
			if ok {
				if seen[seg.Param] {
					fail(i, "duplicate parameter {%s}: the name is already used in this pattern; give each parameter its own name", seg.Param)
				}
				seen[seg.Param] = true
				segs = append(segs, seg)
			}
			i = end + 1
			lit = i
			continue
		case c == '}':
			fail(i, `unmatched "}"; braces only enclose parameters, as in {id}`)
		case c < 0x20 || c == 0x7f:
			fail(i, "control character %q in the pattern; use printable characters such as ':' or '_'", c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				fail(i, "invalid UTF-8 in the pattern")
			} else if unicode.IsSpace(r) || !unicode.IsPrint(r) {
				fail(i, "%q in the pattern; keys must be easy to type in redis-cli: use ':', '_' or '-' instead", r)
			}
			i += size
			continue
		}
		i++
	}
	flush(len(s))
	return segs, errs
}

// canBeEmpty reports whether every segment can encode to nothing: string
// parameters only (a literal or an integer is never empty). Such a pattern
// is refused: "{id}" with id "" would make the key "lock:{}", an empty Redis
// Cluster hash tag, which puts the lock and its fence counter in different
// slots.
func canBeEmpty(segs []Segment) bool {
	for _, seg := range segs {
		if !seg.IsParam() || seg.Type != TypeString {
			return false
		}
	}
	return true
}

// parseParam checks the inside of a "{...}" at offset off of the pattern.
func parseParam(body string, off int, fail func(int, string, ...any)) (Segment, bool) {
	if body == "" {
		fail(off, `empty parameter "{}"; write {name} or {name:type}, e.g. {id}`)
		return Segment{}, false
	}
	name, typ, hasType := strings.Cut(body, ":")
	ok := true
	switch {
	case name == "":
		fail(off, "parameter {%s} has no name; write {name:type}, e.g. {id%s}", body, body)
		ok = false
	case name == "_":
		fail(off, "parameter {%s}: the blank identifier _ cannot name a parameter; use a name such as {id}", body)
		ok = false
	case !isASCIIIdent(name):
		fail(off, "parameter name %q is not a Go identifier; use ASCII letters, digits and _, starting with a letter, e.g. {%s}", name, suggestIdent(name))
		ok = false
	case token.IsKeyword(name):
		fail(off, "parameter name %q is a Go keyword; rename it, e.g. {%s_}", name, name)
		ok = false
	}
	t := TypeString
	if hasType {
		t = ParamType(typ)
		if typ == "" {
			fail(off, `parameter {%s} has no type after ":"; use one of %s, or drop the ":" for a string`, body, typeList())
			ok = false
		} else if !t.valid() {
			fail(off, "unknown parameter type %q in {%s}; use one of %s", typ, body, typeList())
			ok = false
		}
	}
	return Segment{Param: name, Type: t}, ok
}

func typeList() string {
	var b strings.Builder
	for i, t := range paramTypes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t))
	}
	return b.String()
}

// isASCIIIdent reports whether s is a Go identifier made of ASCII letters,
// digits and underscores.
func isASCIIIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// suggestIdent turns s into an identifier for a "did you mean" hint.
func suggestIdent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9':
			if b.Len() == 0 && '0' <= c && c <= '9' {
				b.WriteString("p")
			}
			b.WriteByte(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	out := strings.TrimRight(b.String(), "_")
	if out == "" || out == "_" || token.IsKeyword(out) {
		return "id"
	}
	return out
}
