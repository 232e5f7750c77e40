package telemetry

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// KeyMode says how a lock key is recorded in the lockkit.key span attribute.
type KeyMode uint8

// The key modes.
const (
	// KeyRaw records the key as it is. Error messages are used as span status
	// descriptions only in this mode.
	KeyRaw KeyMode = iota
	// KeyHashed records HashKey(key, secret), the secret given to lockkit.WithKeyMode: searchable, not readable.
	// Use it when keys hold personal data.
	KeyHashed
	// KeyOmitted leaves the attribute out.
	KeyOmitted
)

// HashKey returns the lockkit.key value that KeyHashed records for key: the first
// 16 bytes of HMAC-SHA-256(secret, key), or of SHA-256(key) when secret is empty,
// in lower-case hex. Use it to find a key's spans in a tracing backend.
func HashKey(key string, secret []byte) string {
	var sum []byte
	if len(secret) > 0 {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(key))
		sum = mac.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(key))
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}
