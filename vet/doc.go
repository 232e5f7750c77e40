// Package vet is TODO
package vet
