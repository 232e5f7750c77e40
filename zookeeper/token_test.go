package zookeeper

import "testing"

// TestTokenOf: the token a node's name carries is read back as it was
// given, safe or hex-encoded, and a name that is no lock node gives "".
func TestTokenOf(t *testing.T) {
	for _, tok := range []string{"5G46ATOZPROAX2SG7SRXJKHL7K", "a/b c-d", "x-0000000001"} {
		child := tokenName(tok) + "0000000042"
		if got := tokenOf(child); got != tok {
			t.Errorf("tokenOf(%q) = %q, want %q", child, got, tok)
		}
	}
	for _, child := range []string{"", "lock", "TOKEN-42", "~zz-0000000001"} {
		if got := tokenOf(child); got != "" {
			t.Errorf("tokenOf(%q) = %q, want \"\"", child, got)
		}
	}
}
