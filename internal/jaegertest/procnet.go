package jaegertest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// procNetEntry is one line of /proc/net/{tcp,tcp6,udp,udp6}.
type procNetEntry struct {
	local netip.AddrPort
	state string // hex: 0A is TCP LISTEN, 07 is UDP unconnected (TCP_CLOSE)
	inode string
}

// parseProcNet parses the socket table format of /proc/net/tcp and friends:
//
//	sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
//	 0: 0100007F:10E1 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0   0       12345 ...
//
// Addresses are the kernel's in-memory bytes printed as native-endian 32-bit hex
// words; ports are plain hex.
func parseProcNet(b []byte) ([]procNetEntry, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "sl") {
		return nil, fmt.Errorf("no header line")
	}
	var out []procNetEntry
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			return nil, fmt.Errorf("short line %q", line)
		}
		local, err := parseProcAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out = append(out, procNetEntry{local: local, state: f[3], inode: f[9]})
	}
	return out, nil
}

// parseProcAddr parses "0100007F:10E1" (IPv4) or a 32-digit IPv6 address and port.
func parseProcAddr(s string) (netip.AddrPort, error) {
	addrHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: port: %w", s, err)
	}
	raw, err := hex.DecodeString(addrHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad IP", s)
	}
	// Each 32-bit word was printed as a native-endian integer: turn it back into
	// the bytes it was in memory, which are in network order.
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
