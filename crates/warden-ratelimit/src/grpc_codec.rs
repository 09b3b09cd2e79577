//! The protobuf codec of RLS calls, with buffers sized for them.
//!
//! tonic's default codec starts every call's encode and decode buffers at 8 KiB; a
//! ShouldRateLimit message is a few dozen bytes, and those large short-lived allocations showed
//! up as a fifth of the service's CPU (malloc, free, consolidation) at high decision rates.
//! Buffers still grow for a larger message.

use std::marker::PhantomData;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::ProstCodec;

/// Initial buffer per call; yield threshold as tonic's default.
const SETTINGS: (usize, usize) = (512, 32 * 1024);

/// `ProstCodec` with small initial buffers. `T` is encoded, `U` decoded.
#[derive(Debug, Clone, Copy)]
pub struct SmallMessageCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for SmallMessageCodec<T, U> {
    fn default() -> Self {
        SmallMessageCodec(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(SETTINGS.0, SETTINGS.1)
}

impl<T, U> Codec for SmallMessageCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
