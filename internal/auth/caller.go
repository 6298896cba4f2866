package auth

// Caller is who asks: the token's subject and role.
type Caller struct {
	ID   int64
	Role string // Customer, Host or Admin
}

// Admin reports whether c may act on any booking.
func (c Caller) Admin() bool { return c.Role == Admin }

// Host reports whether c acts as a host (of their cars).
func (c Caller) Host() bool { return c.Role == Host }

// Customer reports whether c acts as a customer (of their bookings).
func (c Caller) Customer() bool { return c.Role == Customer }
