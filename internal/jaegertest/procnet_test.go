package jaegertest

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
)

func TestParseProcNet(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("fixture written on a little-endian host")
	}
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:10E1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000000000 100 0 0 10 0
   2: 0100007F:A1B2 0100007F:10E1 01 00000000:00000000 00:00000000 00000000     0        0 4244 1 0000000000000000 20 4 30 10 -1
`
	got, err := parseProcNet([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []procNetEntry{
		{netip.MustParseAddrPort("127.0.0.1:4321"), "0A", "4242"},
		{netip.MustParseAddrPort("0.0.0.0:8080"), "0A", "4243"},
		{netip.MustParseAddrPort("127.0.0.1:41394"), "01", "4244"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseProcNet = %v, want %v", got, want)
	}

	const table6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 98 1 0000000000000000 100 0 0 10 0
`
	got, err = parseProcNet([]byte(table6))
	if err != nil {
		t.Fatal(err)
	}
	want = []procNetEntry{
		{netip.MustParseAddrPort("[::1]:8080"), "0A", "99"},
		{netip.MustParseAddrPort("127.0.0.1:80"), "0A", "98"}, // v4-mapped, unmapped
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseProcNet v6 = %v, want %v", got, want)
	}

	for _, bad := range []string{"", "garbage", "  sl local\n 0: 0100007F 00000000:0000 0A a b c d e 1"} {
		if _, err := parseProcNet([]byte(bad)); err == nil {
			t.Errorf("parseProcNet(%q) succeeded", bad)
		}
	}
}

// TestListeningSocketsOwnProcess checks the /proc scan against listeners this test
// opens itself.
func TestListeningSocketsOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	var want []Socket
	l4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	want = append(want, Socket{"tcp", netip.MustParseAddrPort(l4.Addr().String())})
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer l6.Close()
		want = append(want, Socket{"tcp", netip.MustParseAddrPort(l6.Addr().String())})
	}
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	want = append(want, Socket{"udp", netip.MustParseAddrPort(u.LocalAddr().String())})

	got, err := ListeningSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("ListeningSockets = %v, missing %v", got, w)
		}
	}
}
