//! [`delegate_body!`]: `http_body::Body` for a body made of other bodies,
//! written once.

/// Implements `http_body::Body` (data `Bytes`) for a type whose frames are
/// another body's:
///
/// - `delegate_body!(Type: enum { Type::A, Type::B => map }, Error = E)`:
///   each variant holds a body; a variant's frames pass through `map` when
///   given, and its errors through `E::from`.
/// - `delegate_body!(Type: struct field, Error = E)`: the body is the
///   field; its errors pass through `E::from`, or through
///   `on_error(&mut Type, error)` when written `struct field, on_error = f`.
///
/// `is_end_stream` and `size_hint` are the inner body's. The enum's match
/// is static dispatch: nothing is boxed, or called through a pointer, per
/// frame. Every inner body is `Unpin`.
macro_rules! delegate_body {
    ($ty:ty : enum { $($variant:path $(=> $map:path)?),+ $(,)? }, Error = $err:ty) => {
        impl http_body::Body for $ty {
            type Data = bytes::Bytes;
            type Error = $err;

            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, $err>>> {
                match self.get_mut() {
                    $($variant(body) => std::pin::Pin::new(body)
                        .poll_frame(cx)
                        $(.map_ok($map))?
                        .map_err(<$err>::from),)+
                }
            }

            fn is_end_stream(&self) -> bool {
                match self {
                    $($variant(body) => http_body::Body::is_end_stream(body),)+
                }
            }

            fn size_hint(&self) -> http_body::SizeHint {
                match self {
                    $($variant(body) => http_body::Body::size_hint(body),)+
                }
            }
        }
    };
    ($ty:ty : struct $field:ident, Error = $err:ty) => {
        $crate::proxy::delegate::delegate_body!(
            $ty: struct $field,
            on_error = |_: &mut $ty, e| <$err>::from(e),
            Error = $err
        );
    };
    ($ty:ty : struct $field:ident, on_error = $on_error:expr, Error = $err:ty) => {
        impl http_body::Body for $ty {
            type Data = bytes::Bytes;
            type Error = $err;

            fn poll_frame(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, $err>>> {
                let this = self.get_mut();
                let polled = std::pin::Pin::new(&mut this.$field).poll_frame(cx);
                polled.map_err(|e| ($on_error)(this, e))
            }

            fn is_end_stream(&self) -> bool {
                http_body::Body::is_end_stream(&self.$field)
            }

            fn size_hint(&self) -> http_body::SizeHint {
                http_body::Body::size_hint(&self.$field)
            }
        }
    };
}

pub(crate) use delegate_body;
