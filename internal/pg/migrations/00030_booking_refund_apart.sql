-- A booking's refundAmount is its cancellation's refund again, what the
-- refund quote said and the cancellation policy gave, and nothing else: a
-- cancellation that refunds 80 % of the fare answers 80 % of it, and a
-- hold's release 0, whatever other money came back. The money that arrived
-- for the booking but could not pay for it (late, under another
-- transaction, the wrong amount), returned in full, is returnedAmount, a
-- member of its own. refundStatus still follows all the money owed back.
-- Only booking_view's body changes (as Go's booking.View does): no table
-- is touched.

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
        'refundAmount', b.refund_amount,
        'returnedAmount', nullif(b.refund_returned, 0),
        'refundStatus', nullif(b.refund_status, ''),
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
        'extendedAt', CASE WHEN b.extended_at IS NOT NULL THEN json_time_at(b.extended_at, coalesce(b.utc_offset, 0)) END,
        'flightId', b.flight_id, 'fareClass', b.fare_class,
        'seats', CASE WHEN cardinality(b.seats) > 0 THEN to_jsonb(b.seats) END,
        'quantity', nullif(b.quantity, 0),
        'paymentUrl', CASE WHEN b.status = 'HELD' THEN '/bookings/' || b.id || '/payments' END,
        'refundAmount', CASE WHEN b.refund_amount IS NOT NULL OR b.refund_returned > 0
            THEN coalesce(b.refund_amount, 0) + b.refund_returned END,
        'refundStatus', nullif(b.refund_status, ''),
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
