-- A booking says when its hold was extended (extendedAt, docs/api.md), so
-- that a client can tell that its one extension is spent without asking
-- for it. booking_view, the booking as the events the database writes
-- itself show it, renders it as Go's booking.View does: in the offset the
-- client wrote its times in, absent until the hold is extended. The
-- booking.expired event of an extended hold (hold_car, hold_flight) then
-- carries it as booking.extended did.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'bookingId', b.id, 'kind', b.kind, 'status', b.status, 'customerId', b.customer_id,
        'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time_at(b.hold_expires_at, coalesce(b.utc_offset, 0)) END,
        'extendedAt', CASE WHEN b.extended_at IS NOT NULL THEN json_time_at(b.extended_at, coalesce(b.utc_offset, 0)) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', b.refund_amount, 'refundStatus', nullif(b.refund_status, ''),
        'cancelReason', nullif(b.cancel_reason, ''),
        'carId', b.car_id,
        'from', CASE WHEN b.kind = 'car' THEN json_time_at(lower(b.period), coalesce(b.utc_offset, 0)) END,
        'to', CASE WHEN b.kind = 'car' THEN json_time_at(upper(b.period), coalesce(b.utc_offset, 0)) END,
        'deposit', CASE WHEN b.kind = 'car' THEN b.amount END,
        'rentalPrice', CASE WHEN b.kind = 'car' THEN b.rental_price END,
        'version', b.version,
        'createdAt', json_time_at(b.created_at, coalesce(b.utc_offset, 0)),
        'updatedAt', json_time_at(b.updated_at, coalesce(b.utc_offset, 0))));
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION booking_view(b booking) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'bookingId', b.id, 'kind', b.kind, 'status', b.status, 'customerId', b.customer_id,
        'amount', b.amount, 'currency', b.currency,
        'holdExpiresAt', CASE WHEN b.status = 'HELD' THEN json_time_at(b.hold_expires_at, coalesce(b.utc_offset, 0)) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', b.refund_amount, 'refundStatus', nullif(b.refund_status, ''),
        'cancelReason', nullif(b.cancel_reason, ''),
        'carId', b.car_id,
        'from', CASE WHEN b.kind = 'car' THEN json_time_at(lower(b.period), coalesce(b.utc_offset, 0)) END,
        'to', CASE WHEN b.kind = 'car' THEN json_time_at(upper(b.period), coalesce(b.utc_offset, 0)) END,
        'deposit', CASE WHEN b.kind = 'car' THEN b.amount END,
        'rentalPrice', CASE WHEN b.kind = 'car' THEN b.rental_price END,
        'version', b.version,
        'createdAt', json_time_at(b.created_at, coalesce(b.utc_offset, 0)),
        'updatedAt', json_time_at(b.updated_at, coalesce(b.utc_offset, 0))));
-- +goose StatementEnd
