// noBody is declared without a body in odd.go.
TEXT ·noBody(SB),0,$0-24
	RET
