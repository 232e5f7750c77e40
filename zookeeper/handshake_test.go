package zookeeper

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// TestHandshakeTimeout: the session id and negotiated timeout are read from
// the server's ConnectResponse however the client's reads split it, and
// the bytes reach the client unchanged; a refused session (id 0) sets
// nothing.
func TestHandshakeTimeout(t *testing.T) {
	frame := func(ms int32, id int64) []byte {
		b := make([]byte, 4+4+4+8+4+16)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		binary.BigEndian.PutUint32(b[8:], uint32(ms))
		binary.BigEndian.PutUint64(b[12:], uint64(id))
		binary.BigEndian.PutUint32(b[20:], 16)
		return b
	}
	for _, tc := range []struct {
		name   string
		ms     int32
		id     int64
		chunks []int // the server's writes
		wantID int64
	}{
		{"whole", 4000, 0x1234, nil, 0x1234},
		{"byte by byte", 1000, 0x77, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0x77},
		{"split in the id", 20000, 0x100000000, []int{4, 9}, 0x100000000},
		{"refused", 0, 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := net.Pipe()
			defer srv.Close()
			s := &session{changed: make(chan struct{}), kick: make(chan struct{}, 1)}
			hc := &handshakeConn{Conn: cli, s: s}
			defer hc.Close()
			f := frame(tc.ms, tc.id)
			go func() {
				rest := f
				for _, n := range tc.chunks {
					_, _ = srv.Write(rest[:n])
					rest = rest[n:]
				}
				_, _ = srv.Write(rest)
				_, _ = srv.Write([]byte("next"))
			}()
			got := make([]byte, len(f)+4)
			if _, err := io.ReadFull(hc, got); err != nil {
				t.Fatal(err)
			}
			if string(got) != string(f)+"next" {
				t.Fatalf("the client read %x, want %x and \"next\"", got, f)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			want := time.Duration(tc.ms) * time.Millisecond
			if tc.wantID == 0 {
				want = 0
			}
			if s.sid != tc.wantID || s.negotiated != want {
				t.Fatalf("session %#x timeout %v, want %#x and %v", s.sid, s.negotiated, tc.wantID, want)
			}
		})
	}
}
