package event

import "bytes"

// parse fills w from value exactly as json.Unmarshal(value, w) would, with
// rawValue taking each field's bytes as they appear, and returns the *Error
// Decode has always given for what json.Unmarshal refused: a syntax error
// anywhere first ("malformed JSON at byte N", N as json.SyntaxError.Offset
// counts), then the first value of the wrong type for an object of the
// schema. It walks the bytes once and allocates nothing but an error;
// encoding/json's reflection was 7.5 % of the processor's CPU in bench a,
// and Decode went from 20 to 11 allocations (BenchmarkDecode). FuzzParse
// holds it to json.Unmarshal.
//
// The rules it keeps from encoding/json: keys match the schema's names
// exactly or else under Unicode case folding, after unescaping; the last of
// duplicate keys wins, and a duplicate object merges into the first; null
// leaves an object as it was and gives a field the raw bytes "null"
// (absent, to rawValue.present); unknown keys are skipped. value is valid
// UTF-8 and nests at most MaxDepth deep (decode checks both first), so the
// brackets a skipped value opens fit an array on the stack.
func parse(value []byte, w *wire) *Error {
	p := parser{b: value}
	p.space()
	switch {
	case p.i == len(p.b):
		return p.eof()
	case p.b[p.i] == '{':
		if e := p.event(w); e != nil {
			return e
		}
	default:
		start := p.i
		if e := p.skip(); e != nil {
			return e
		}
		if string(p.b[start:p.i]) != "null" { // null leaves w zero
			p.typeErr = invalid("", "event must be a JSON object")
		}
	}
	p.space()
	if p.i < len(p.b) {
		return p.syntax() // trailing data
	}
	return p.typeErr
}

type parser struct {
	b []byte
	i int
	// typeErr is the first value of the wrong type for the schema; it is
	// reported only if the whole value is well-formed, as json.Unmarshal does.
	typeErr *Error
}

// syntax is the error for the byte at p.i, which no JSON text may have there.
func (p *parser) syntax() *Error {
	return invalid("", "malformed JSON at byte %d", p.i+1)
}

// eof is the error for a value cut short.
func (p *parser) eof() *Error {
	return invalid("", "malformed JSON at byte %d", len(p.b))
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// Keys of the schema's objects.
const (
	keyNone = iota
	keyID
	keySubscription
	keyPayload
	keyPayloadB64
	keyTTL
	keyUrgency
	keyTopic
	keyCreatedAt
	keyApp
	keyEndpoint
	keyKeys
	keyP256dh
	keyAuth
)

var (
	eventKeys        = []string{keyID: "id", keySubscription: "subscription", keyPayload: "payload", keyPayloadB64: "payload_b64", keyTTL: "ttl", keyUrgency: "urgency", keyTopic: "topic", keyCreatedAt: "created_at", keyApp: "app"}
	subscriptionKeys = []string{keyEndpoint: "endpoint", keyKeys: "keys"}
	keysKeys         = []string{keyP256dh: "p256dh", keyAuth: "auth"}
)

// event reads the event object at p.i.
func (p *parser) event(w *wire) *Error {
	return p.object(eventKeys, func(k int) *Error {
		switch k {
		case keyID:
			return p.raw(&w.ID)
		case keySubscription:
			return p.nested("subscription", func() *Error { return p.subscription(&w.Subscription) })
		case keyPayload:
			return p.raw(&w.Payload)
		case keyPayloadB64:
			return p.raw(&w.PayloadB64)
		case keyTTL:
			return p.raw(&w.TTL)
		case keyUrgency:
			return p.raw(&w.Urgency)
		case keyTopic:
			return p.raw(&w.Topic)
		case keyCreatedAt:
			return p.raw(&w.CreatedAt)
		case keyApp:
			return p.raw(&w.App)
		}
		return p.skip()
	})
}

func (p *parser) subscription(s *wireSubscription) *Error {
	s.given = true
	return p.object(subscriptionKeys, func(k int) *Error {
		switch k {
		case keyEndpoint:
			return p.raw(&s.Endpoint)
		case keyKeys:
			return p.nested("subscription.keys", func() *Error { return p.keys(&s.Keys) })
		}
		return p.skip()
	})
}

func (p *parser) keys(ks *wireKeys) *Error {
	ks.given = true
	return p.object(keysKeys, func(k int) *Error {
		switch k {
		case keyP256dh:
			return p.raw(&ks.P256dh)
		case keyAuth:
			return p.raw(&ks.Auth)
		}
		return p.skip()
	})
}

// nested reads the value at p.i for an object of the schema named field:
// an object goes to read, null changes nothing, anything else is skipped
// and, if it is the first such value, remembered as the type error.
func (p *parser) nested(field string, read func() *Error) *Error {
	switch p.b[p.i] {
	case '{':
		return read()
	case 'n':
		return p.skip()
	}
	if e := p.skip(); e != nil {
		return e
	}
	if p.typeErr == nil {
		p.typeErr = invalid(field, "want a JSON object")
	}
	return nil
}

// raw skips the value at p.i and points *r at its bytes.
func (p *parser) raw(r *rawValue) *Error {
	start := p.i
	if e := p.skip(); e != nil {
		return e
	}
	*r = rawValue(p.b[start:p.i])
	return nil
}

// object reads the object at p.i, a '{', calling member with the index in
// names of each key (keyNone for keys not there) and p.i at its value, which
// member must consume.
func (p *parser) object(names []string, member func(k int) *Error) *Error {
	p.i++ // '{'
	p.space()
	if p.i == len(p.b) {
		return p.eof()
	}
	if p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		if p.i == len(p.b) {
			return p.eof()
		}
		if p.b[p.i] != '"' {
			return p.syntax()
		}
		start := p.i
		escaped, e := p.str()
		if e != nil {
			return e
		}
		k := lookup(names, p.b[start+1:p.i-1], escaped)
		p.space()
		if p.i == len(p.b) {
			return p.eof()
		}
		if p.b[p.i] != ':' {
			return p.syntax()
		}
		p.i++
		p.space()
		if p.i == len(p.b) {
			return p.eof()
		}
		if e := member(k); e != nil {
			return e
		}
		p.space()
		if p.i == len(p.b) {
			return p.eof()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.space()
		case '}':
			p.i++
			return nil
		default:
			return p.syntax()
		}
	}
}

// lookup returns the index in names of the key whose body (between the
// quotes) is key, or keyNone: an exact match, or else one under Unicode
// case folding (encoding/json's rule; the schema's names differ under it).
func lookup(names []string, key []byte, escaped bool) int {
	if escaped {
		var buf [32]byte
		n := unquote(nil, key)
		if n > len(buf) {
			return keyNone // longer than every name, whatever its case
		}
		unquote(buf[:n], key)
		key = buf[:n]
	}
	for k, name := range names {
		if name != "" && string(key) == name {
			return k
		}
	}
	for k, name := range names {
		if name != "" && bytes.EqualFold(key, []byte(name)) {
			return k
		}
	}
	return keyNone
}

// skip steps over the value at p.i, checking its syntax.
func (p *parser) skip() *Error {
	// open holds, for each object or array open inside the value, whether
	// it is an object. Decode has checked the nesting, so the array on the
	// stack is enough; append would grow it all the same.
	var stack [MaxDepth]bool
	open := stack[:0]
	for {
		if p.i == len(p.b) {
			return p.eof()
		}
		// A value.
		switch c := p.b[p.i]; {
		case c == '{' || c == '[':
			p.i++
			p.space()
			if p.i == len(p.b) {
				return p.eof()
			}
			if p.b[p.i] == c+2 { // '}' or ']'
				p.i++
				break
			}
			open = append(open, c == '{')
			if c == '{' {
				if e := p.key(); e != nil {
					return e
				}
			}
			continue
		case c == '"':
			if _, e := p.str(); e != nil {
				return e
			}
		case c == '-' || '0' <= c && c <= '9':
			if e := p.number(); e != nil {
				return e
			}
		case c == 't':
			if e := p.literal("true"); e != nil {
				return e
			}
		case c == 'f':
			if e := p.literal("false"); e != nil {
				return e
			}
		case c == 'n':
			if e := p.literal("null"); e != nil {
				return e
			}
		default:
			return p.syntax()
		}
		// After a value: close what ends here, then a ',' and the next.
		for {
			if len(open) == 0 {
				return nil
			}
			p.space()
			if p.i == len(p.b) {
				return p.eof()
			}
			inObject := open[len(open)-1]
			closing := byte(']')
			if inObject {
				closing = '}'
			}
			switch p.b[p.i] {
			case closing:
				p.i++
				open = open[:len(open)-1]
				continue
			case ',':
				p.i++
				p.space()
				if inObject {
					if e := p.key(); e != nil {
						return e
					}
				}
			default:
				return p.syntax()
			}
			break
		}
	}
}

// key reads `"name" :` and the space after it, at p.i inside a skipped
// object.
func (p *parser) key() *Error {
	if p.i == len(p.b) {
		return p.eof()
	}
	if p.b[p.i] != '"' {
		return p.syntax()
	}
	if _, e := p.str(); e != nil {
		return e
	}
	p.space()
	if p.i == len(p.b) {
		return p.eof()
	}
	if p.b[p.i] != ':' {
		return p.syntax()
	}
	p.i++
	p.space()
	return nil
}

// str steps over the string at p.i, a '"', and reports whether it holds an
// escape.
func (p *parser) str() (escaped bool, e *Error) {
	p.i++
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return escaped, nil
		case c < 0x20:
			return false, p.syntax()
		case c == '\\':
			escaped = true
			p.i++
			if p.i == len(p.b) {
				return false, p.eof()
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				p.i++
				for range 4 {
					if p.i == len(p.b) {
						return false, p.eof()
					}
					if !isHex(p.b[p.i]) {
						return false, p.syntax()
					}
					p.i++
				}
			default:
				return false, p.syntax()
			}
		default:
			p.i++
		}
	}
	return false, p.eof()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number steps over the number at p.i (RFC 8259 §6).
func (p *parser) number() *Error {
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i == len(p.b):
		return p.eof()
	case p.b[p.i] == '0':
		p.i++
	case '1' <= p.b[p.i] && p.b[p.i] <= '9':
		p.digits()
	default:
		return p.syntax()
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if e := p.someDigits(); e != nil {
			return e
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if e := p.someDigits(); e != nil {
			return e
		}
	}
	return nil
}

func (p *parser) digits() {
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
}

// someDigits steps over one digit or more.
func (p *parser) someDigits() *Error {
	switch {
	case p.i == len(p.b):
		return p.eof()
	case p.b[p.i] < '0' || p.b[p.i] > '9':
		return p.syntax()
	}
	p.digits()
	return nil
}

// literal steps over lit (true, false or null) at p.i.
func (p *parser) literal(lit string) *Error {
	for k := 0; k < len(lit); k++ {
		switch {
		case p.i == len(p.b):
			return p.eof()
		case p.b[p.i] != lit[k]:
			return p.syntax()
		}
		p.i++
	}
	return nil
}
