package event

import (
	"unicode/utf16"
	"unicode/utf8"
)

// unquote decodes the body of a JSON string (between the quotes) that
// parse has already validated. With dst == nil it only returns the
// decoded length; otherwise dst must be at least that long. Lone surrogates
// become U+FFFD, as encoding/json does. It never panics, whatever s holds.
func unquote(dst, s []byte) int {
	n := 0
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			// Copy the run up to the next escape in one go.
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			if dst != nil {
				copy(dst[n:], s[i:j])
			}
			n += j - i
			i = j
			continue
		}
		if i+1 >= len(s) {
			return n // a dangling backslash; not reached for valid JSON
		}
		var c byte
		switch s[i+1] {
		case '"', '\\', '/':
			c = s[i+1]
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return n // not reached for valid JSON
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2, ok = hex4(s[i+2:])
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			var buf [utf8.UTFMax]byte
			w := utf8.EncodeRune(buf[:], r)
			if dst != nil {
				copy(dst[n:], buf[:w])
			}
			n += w
			continue
		default:
			return n // not reached for valid JSON
		}
		if dst != nil {
			dst[n] = c
		}
		n++
		i += 2
	}
	return n
}

// hex4 reads four hex digits.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
