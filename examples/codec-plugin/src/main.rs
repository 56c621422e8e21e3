//! Writes a format v2 store of token sequences with the `delta-rle` codec,
//! reads it back, and shows that a reader without the codec refuses it.
//!
//! `cargo run -p codec-plugin -- [DIR]` (a temporary directory by default).

use codec_plugin::DeltaRle;
use loaderx_store::{CodecRegistry, OpenOptions, Store, format::v2::Schema};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
        .join(format!("codec-plugin-{}", std::process::id()));
    let mut codecs = CodecRegistry::new();
    codecs.register(DeltaRle)?;
    let options = OpenOptions::default().with_codecs(codecs);

    // 1000 "documents" of 512 token ids each, slowly increasing.
    let tokens: Vec<u8> = (0..1000u32 * 512)
        .flat_map(|i| (50_000 + i / 7).to_le_bytes())
        .collect();
    {
        let store: Store = Store::create_v2(&dir, &Schema::bytes(DeltaRle::TAG), options.clone())?;
        store.append_fixed(&tokens, 1000, 2048)?;
        let stats = store.stats()?;
        println!(
            "wrote {} records: {} bytes of tokens stored in {} bytes",
            stats.records,
            tokens.len(),
            stats.live_bytes
        );
    }
    let store: Store = Store::open_with(&dir, options)?;
    let mut back = vec![0u8; tokens.len()];
    let all: Vec<u64> = (0..1000).collect();
    store.gather(&all, &mut back, 2048)?;
    assert_eq!(back, tokens);
    println!("read back all {} records", store.len());
    drop(store);

    match Store::<loaderx_store::Deflate>::open_read_only(&dir) {
        Ok(_) => return Err("a reader without delta-rle opened the store".into()),
        Err(e) => println!("without the codec: {e}"),
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
