#pragma once
// Guards libhdf5 against a damaged global heap before it reads variable-length strings
// (issue 16, found by tests/fuzz's result-file reader).
//
// A variable-length string in a dataset is stored as a descriptor {length u32, collection address,
// object index u32}; its bytes live in a global-heap collection ("GCOL"). libhdf5 1.10 trusts the
// collection: an object whose recorded size exceeds the descriptor's length is memcpy'd past the
// buffer it allocated from the length (a heap overflow), an object of size 0 makes its collection
// parser loop forever, and a collection without its signature is re-read for every string (minutes
// on one file). None of this is reachable through H5Dread's error handling.
//
// check_vlen_strings reads the table's raw chunks (located with H5Dget_chunk_info_by_coord, read
// with pread: no conversion, no heap access),
// decodes every descriptor of the rows that will be read, and walks each referenced collection with
// plain pread calls under the rules libhdf5's parser follows (HDF5 File Format Specification 3.0,
// section III.E "Global Heap"), refusing with fp8moe::Error anything libhdf5 would mis-read: a
// collection outside the file, a bad signature or version, a size below the 4 KiB minimum, objects
// that overrun their collection or have a zero size, duplicate indices, a descriptor whose object is
// missing or whose size is not its length, a string member of an unexpected width, a layout other
// than unfiltered chunks. After it returns, H5Dread of those rows touches only validated bytes.
#include <cstdint>
#include <string>

#include "results/h5.hpp"

namespace fp8moe::results {

// `ds`: an open dataset of a compound type; `rows`: how many leading rows will be read. Throws
// fp8moe::Error naming `path`, the row, the column and what is wrong. Members that are not
// variable-length strings are not looked at. Cost: one pass over the rows' chunks and one read per
// distinct collection.
void check_vlen_strings(h5::Id ds, std::uint64_t rows, const std::string& path);

// Refuses a table with a fill value (read from the object header's bytes, before libhdf5 converts
// it): fp8moe never sets one, and libhdf5 reads a defined one's strings from the global heap
// unchecked (H5Dget_create_plist; every chunk a resumed sweep's write fills). Called whenever the
// table is opened.
void check_fill_value(h5::Id ds, const std::string& path);

}  // namespace fp8moe::results
