//! Requests' objects are objects: serde's derive also reads a struct from an array of its fields' values
//! (`[null, 1]`), which the API does not offer.

use serde::Deserialize;

/// An optional struct read from a JSON object only (see `object_only`), null for none.
pub fn some_object<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct Object<T>(T);
    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object_only(d).map(Object)
        }
    }
    Ok(Option::<Object<T>>::deserialize(d)?.map(|o| o.0))
}

/// Read a struct from a JSON object only. serde's derive also takes an array of the fields' values in order
/// (`[null, 1]`), which the API does not offer: a request's objects are objects.
pub fn object_only<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct Fields<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Fields(std::marker::PhantomData))
}

/// A list of structs, each read from a JSON object only (see `object_only`).
pub fn objects_only<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    struct Object<T>(T);
    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object_only(d).map(Object)
        }
    }
    Ok(Vec::<Object<T>>::deserialize(d)?.into_iter().map(|o| o.0).collect())
}
