package dispatch

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// The header fields of the client's requests (HPACK-encoded into the
// connection's table) and of the answers (collected as the read loop's
// decoder emits them).

// encodeLocked encodes req's header block into c.hbuf. Every field is
// checked before the first is encoded: the encoder's table must change
// only with a block that is sent. The path is never indexed: every
// subscription's is its own, and a secret.
func (c *h2conn) encodeLocked(req *http.Request, n int64) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	path := req.URL.RequestURI()
	if !httpguts.ValidHostHeader(host) || !httpguts.ValidHeaderFieldValue(path) || req.Method == "" || !httpguts.ValidHeaderFieldName(req.Method) {
		return errors.New("http2: invalid request line")
	}
	size := hfSize(":method", req.Method) + hfSize(":scheme", "https") + hfSize(":authority", host) + hfSize(":path", path)
	ua := false
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return errors.New("http2: invalid header field name")
		}
		name := lowerRequestHeader(k)
		if skipRequestHeader(name) {
			continue
		}
		ua = ua || name == "user-agent"
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return errors.New("http2: invalid header field value")
			}
			size += hfSize(k, v)
		}
	}
	if c.maxHeaderList > 0 && size > int(c.maxHeaderList) {
		return fmt.Errorf("http2: request headers of %d bytes, the push service takes %d", size, c.maxHeaderList)
	}
	c.hbuf.b = c.hbuf.b[:0]
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":method", Value: req.Method})
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":authority", Value: host})
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":path", Value: path, Sensitive: true})
	for k, vs := range req.Header {
		name := lowerRequestHeader(k)
		if skipRequestHeader(name) {
			continue
		}
		for _, v := range vs {
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	if n > 0 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: contentLength(n)})
	}
	if !ua {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "user-agent", Value: userAgent})
	}
	return nil
}

// hfSize is a field's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
func hfSize(name, value string) int { return len(name) + len(value) + 32 }

// skipRequestHeader: the protocol's or the connection's own fields, which
// an HTTP/2 request does not carry as headers (RFC 9113 §8.2.2), and the
// length, which the client sets; name is lower case.
func skipRequestHeader(name string) bool {
	switch name {
	case "host", "content-length", "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive", "te":
		return true
	}
	return false
}

// userAgent is the User-Agent of a request without one, as net/http's.
const userAgent = "Go-http-client/2.0"

// recordSizeValue is the content-length of a push message, always one
// record.
var recordSizeValue = strconv.Itoa(recordSize)

func contentLength(n int64) string {
	if n == recordSize {
		return recordSizeValue
	}
	return strconv.FormatInt(n, 10)
}

// headerBlock is the buffer hpack.Encoder writes a header block into.
type headerBlock struct{ b []byte }

func (h *headerBlock) Write(p []byte) (int, error) {
	h.b = append(h.b, p...)
	return len(p), nil
}

// headerFields collects the fields of one response header block as the
// read loop's hpack.Decoder emits them, within MaxResponseHeaderBytes.
type headerFields struct {
	status string
	header http.Header
	// values backs the header's value slices: one allocation for an
	// answer's few fields, not one each.
	values    []string
	size      int
	invalid   bool // a pseudo-header other than :status, or one after a field
	over      bool // past MaxResponseHeaderBytes
	endStream bool // the HEADERS frame ended the stream
}

func (h *headerFields) reset() { *h = headerFields{} }

func (h *headerFields) add(f hpack.HeaderField) {
	if h.size += int(f.Size()); h.size > MaxResponseHeaderBytes {
		h.over = true
		return
	}
	if f.IsPseudo() {
		if f.Name != ":status" || h.status != "" || h.header != nil {
			h.invalid = true
		}
		h.status = f.Value
		return
	}
	if h.header == nil {
		h.header = make(http.Header, 4)
		h.values = make([]string, 0, 4)
	}
	k := canonicalResponseHeader(f.Name)
	if vs, ok := h.header[k]; ok {
		h.header[k] = append(vs, f.Value) // a repeated field: a slice of its own
		return
	}
	h.values = append(h.values, f.Value)
	h.header[k] = h.values[len(h.values)-1 : len(h.values) : len(h.values)]
}

// canonicalResponseHeader is the http.Header key of a lower-case HTTP/2
// field name; the names push services answer with are spelled out, so
// they take no allocation.
func canonicalResponseHeader(name string) string {
	switch name {
	case "content-length":
		return "Content-Length"
	case "content-type":
		return "Content-Type"
	case "date":
		return "Date"
	case "location":
		return "Location"
	case "retry-after":
		return "Retry-After"
	case "ttl":
		return "Ttl"
	case "x-wns-status":
		return "X-Wns-Status"
	}
	return http.CanonicalHeaderKey(name)
}

// lowerRequestHeader is the HTTP/2 field name of a request header key.
func lowerRequestHeader(k string) string {
	switch k {
	case "Authorization":
		return "authorization"
	case "Content-Encoding":
		return "content-encoding"
	case "Content-Type":
		return "content-type"
	case "Ttl":
		return "ttl"
	case "Topic":
		return "topic"
	case "Urgency":
		return "urgency"
	case "User-Agent":
		return "user-agent"
	}
	return strings.ToLower(k)
}
