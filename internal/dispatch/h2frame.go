package dispatch

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// The frames the client writes, appended to the connection's queue as
// RFC 9113 §4.1 lays them out (http2.Framer would copy each into a buffer
// of its own first). Reading is http2.Framer's.

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(stream>>24&0x7f), byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendSettings(b []byte, settings ...http2.Setting) []byte {
	b = appendFrameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendSettingsAck(b []byte) []byte {
	return appendFrameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func appendWindowUpdate(b []byte, stream, incr uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, incr&0x7fffffff)
}

func appendPingAck(b []byte, data [8]byte) []byte {
	b = appendFrameHeader(b, 8, http2.FramePing, http2.FlagPingAck, 0)
	return append(b, data[:]...)
}

func appendRSTStream(b []byte, stream uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 8, http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

// appendHeaders appends the header block as one HEADERS frame and as many
// CONTINUATION frames as the service's frame size asks.
func appendHeaders(b []byte, stream uint32, block []byte, endStream bool, maxFrame int) []byte {
	t, flags := http2.FrameHeaders, http2.Flags(0)
	if endStream {
		flags = http2.FlagHeadersEndStream
	}
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders // the same bit in CONTINUATION
		}
		b = appendFrameHeader(b, n, t, f, stream)
		b = append(b, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		t, flags = http2.FrameContinuation, 0
	}
}

func appendData(b []byte, stream uint32, data []byte, endStream bool) []byte {
	var flags http2.Flags
	if endStream {
		flags = http2.FlagDataEndStream
	}
	b = appendFrameHeader(b, len(data), http2.FrameData, flags, stream)
	return append(b, data...)
}
